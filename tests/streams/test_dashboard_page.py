"""The dashboard page itself, without a browser or a worker (tests/streams/test_dashboard.py runs it in Chromium)."""

from __future__ import annotations


def test_the_page_is_filled_in_one_pass():
    """No browser needed: the job id's own placeholders are not filled again (issue 27 item 3)."""
    from stepwatch.streams.dashboard import render_dashboard

    page = render_dashboard("__JOB__<img src=x onerror=alert(1)>__TITLE__")
    assert "<img" not in page
    assert "const JOB = \"__JOB__\\u003cimg src=x onerror=alert(1)\\u003e__TITLE__\";" in page
    assert "<title>stepwatch __JOB__&lt;img src=x onerror=alert(1)&gt;__TITLE__</title>" in page
