"""Writes the ONNX backend node tests of the installed onnx package into
OUT/node/<test>/ (model.onnx, test_data_set_0/input_N.pb, output_N.pb),
then the package's "light" models likewise into OUT/light/, then
OUT/VERSION.  The pip wheel ships the node tests as code, not data:
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
    light = write_light(os.path.join(args.out, "light"))
    with open(os.path.join(args.out, "VERSION"), "w") as f:
        f.write(onnx.__version__ + "\n")
    print(f"onnx {onnx.__version__}: {len(cases)} node tests in {args.out}/node, {light} light models in "
          f"{args.out}/light")


def write_light(out):
    """The package's "light" models (AlexNet, DenseNet-121, Inception,
    ResNet-50, ShuffleNet, SqueezeNet, VGG-19, ZFNet-512 with their
    weights made by ConstantOfShape) as node-test folders, test_NAME/,
    with the inputs onnx's own runner gives them (generate_dummy_data,
    not random) and the outputs the package ships."""
    import glob
    import onnx
    from onnx import numpy_helper
    from onnx.backend.test.runner import Runner
    src = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    n = 0
    for path in sorted(glob.glob(os.path.join(src, "light_*.onnx"))):
        name = os.path.basename(path)[len("light_"):-len(".onnx")]
        model = onnx.load(path)
        outputs = [f"{path[:-5]}_output_{i}.pb" for i in range(len(model.graph.output))]
        if not all(os.path.exists(o) for o in outputs):
            continue
        data = os.path.join(out, "test_light_" + name, "test_data_set_0")
        os.makedirs(data)
        shutil.copy(path, os.path.join(out, "test_light_" + name, "model.onnx"))
        inits = {i.name for i in model.graph.initializer}
        inputs = [x for x in model.graph.input if x.name not in inits]
        for i, x in enumerate(inputs):
            value = Runner.generate_dummy_data(x, seed=0, name=name, random=False)
            with open(os.path.join(data, f"input_{i}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(value, x.name).SerializeToString())
        for i, o in enumerate(outputs):
            shutil.copy(o, os.path.join(data, f"output_{i}.pb"))
        n += 1
    return n


if __name__ == "__main__":
    sys.exit(main())
