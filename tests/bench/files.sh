#!/bin/sh
# make bench: reading safetensors headers of growing size (tests/bench/files.c).
exec "${top_builddir:-.}/tests/bench/files_bench"
