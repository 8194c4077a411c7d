import os

# The thread count a call runs on follows other processes' load (backend/native/load.py); the
# suite compares answers of calls made at different moments bit for bit, and a browser or a Ray
# cluster of its own tests may be busy meanwhile: here the count stays as given, except where
# tests/backend/native/test_load.py turns it on.
os.environ.setdefault("AUTOFUSION_ADAPT_THREADS", "0")
