"""python -m gen3 -o DIR [SCENARIO ...]: write the recordings and labels.json (from tests/)."""
import argparse

from .write import write_all

p = argparse.ArgumentParser(prog="gen3")
p.add_argument("-o", "--out", required=True)
p.add_argument("only", nargs="*")
a = p.parse_args()
labels = write_all(a.out, a.only or None)
print(f"{len(labels)} scenarios written to {a.out}")
