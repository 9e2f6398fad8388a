# The Hugging Face blocks in examples/ against NumPy's version of HF's math.
TESTS += tests/hf_blocks.sh
EXTRA_DIST += tests/hf_blocks.sh tests/hf_blocks.py
