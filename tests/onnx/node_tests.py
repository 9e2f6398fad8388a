"""Writes the ONNX backend node tests of the installed onnx package into
OUT/node/<test>/ (model.onnx, test_data_set_0/input_N.pb, output_N.pb),
then OUT/VERSION.  The pip wheel ships them as code, not data:
onnx.backend.test.case.node.collect_testcases() lists them, and
cmd_tools.generate_data writes the cases that the model collector hands
it (by itself only the model tests), so it is handed the node list.

    python3 tests/onnx/node_tests.py OUT
"""
import argparse
import os
import shutil
import sys
import warnings


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    args = ap.parse_args()
    import onnx
    import onnx.backend.test.case.model as model_cases
    from onnx.backend.test.case import node
    from onnx.backend.test.cmd_tools import generate_data

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the cases' own numpy warnings
        cases = node.collect_testcases()
        model_cases.collect_testcases = lambda: cases
        shutil.rmtree(args.out, ignore_errors=True)
        generate_data(argparse.Namespace(output=args.out))
    with open(os.path.join(args.out, "VERSION"), "w") as f:
        f.write(onnx.__version__ + "\n")
    print(f"onnx {onnx.__version__}: {len(cases)} node tests in {args.out}/node")


if __name__ == "__main__":
    sys.exit(main())
