#!/bin/sh
# The ONNX backend node tests of the quantized ops and of UINT8
# (tests/test_onnx_node), each also on emu: QuantizeLinear,
# DequantizeLinear, ConvInteger, MatMulInteger, QLinearConv,
# QLinearMatMul and UINT8 arithmetic.  Skips (77) without the data.
build="${top_builddir:-.}"
tests="test_quantizelinear test_quantizelinear_axis test_dequantizelinear test_dequantizelinear_axis
test_basic_convinteger test_convinteger_with_padding test_convinteger_without_padding test_matmulinteger
test_qlinearconv test_qlinearmatmul_2D test_qlinearmatmul_3D test_add_uint8 test_sub_uint8 test_mul_uint8
test_div_uint8 test_max_uint8 test_min_uint8"
list=$(echo $tests | tr ' ' ,)
out=$(ONNX_NODE_EMU="$list" "$build/tests/test_onnx_node" -v $tests)
rc=$?
echo "$out"
[ $rc -eq 0 ] || exit $rc
# Every one of them passes, on the interpreter and on emu.
want=$(echo $tests | wc -w)
passed=$(echo "$out" | grep -c '^PASS ')
emu=$(echo "$out" | sed -n 's/.*node): .* emu: \([0-9]*\) passed.*/\1/p' | head -n 1)
if [ "$passed" -lt "$want" ] || [ "${emu:-0}" -lt "$want" ]; then
  echo "qdq_node: $passed of $want passed, ${emu:-0} on emu"
  exit 1
fi
