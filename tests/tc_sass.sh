#!/bin/sh
# The tensor-core test kernels (tests/test_mma.c), compiled by the
# runtime's NVRTC for sm_80, sm_90 and sm_90a, use the tensor cores: their
# SASS has HMMA or IMMA for each mma, LDSM for each ldmatrix, LDGSTS and
# its barriers for cp.async, and on sm_90a HGMMA or IGMMA for each wgmma.  Needs cuobjdump (and nvdisasm beside it:
# tests/find_cuobjdump.sh says where it looks).  Skipped without.
set -u
b=${top_builddir:-.}
find_cuobjdump_for=tc_sass
. "${top_srcdir:-.}/tests/find_cuobjdump.sh"
export DLCC_CACHE_DIR=off
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
status=0
for arch in sm_80 sm_90 sm_90a; do
  "$b/tests/test_mma" --cubin "$arch" "$tmp/$arch.cubin" || exit 1
  "$cuobjdump" -sass "$tmp/$arch.cubin" >"$tmp/$arch.sass" || exit 1
  for ins in HMMA.16816.F32 HMMA.16816.F32.BF16 IMMA.16832.S8.S8 HMMA.1688.F32.TF32 \
    LDSM.16.M88 LDSM.16.M88.2 LDSM.16.M88.4 LDSM.16.MT88 LDSM.16.MT88.2 LDSM.16.MT88.4 \
    LDGSTS.E LDGSTS.E.64 LDGSTS.E.BYPASS.128 LDGDEPBAR DEPBAR.LE; do
    if ! grep -q "[[:space:]]$ins[[:space:]]" "$tmp/$arch.sass"; then
      echo "tc_sass: $arch: no $ins in the SASS"
      status=1
    fi
  done
  # wgmma is sm_90a's alone: there each kind and shape is a GMMA, its
  # fence, commit and wait WARPGROUP.ARRIVE and DEPBAR, fence.proxy.async
  # FENCE.VIEW.ASYNC.S; elsewhere the kernels trap and hold none.
  if [ $arch = sm_90a ]; then
    for ins in HGMMA.64x64x16.F32 HGMMA.64x128x16.F32.BF16 HGMMA.64x32x8.F32.TF32 IGMMA.64x256x32.S8.S8 \
      HGMMA.64x16x16.F32 HGMMA.64x256x16.F32.BF16 WARPGROUP.ARRIVE WARPGROUP.DEPBAR.LE FENCE.VIEW.ASYNC.S; do
      if ! grep -q "[[:space:]]$ins[[:space:]]" "$tmp/$arch.sass"; then
        echo "tc_sass: $arch: no $ins in the SASS"
        status=1
      fi
    done
  elif grep -q "GMMA" "$tmp/$arch.sass"; then
    echo "tc_sass: $arch: a GMMA in the SASS of an arch without wgmma"
    status=1
  fi
done
[ $status = 0 ] && echo "tc_sass: sm_80, sm_90, sm_90a: every tensor-core instruction found (wgmma on sm_90a)"
exit $status
