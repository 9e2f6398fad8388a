#!/bin/sh
# make check: tests/gpu/rt_check on the emu device (the harness checks
# itself; on a GPU machine tests/gpu/check.sh runs it on cuda).
exec "${top_builddir:-.}/tests/gpu/rt_check" emu all
