"""One module per ``stepwatch`` command, each with its ``add_parser(sub)`` and ``run(args)``; stepwatch/cli.py
assembles them."""
