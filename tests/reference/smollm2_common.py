"""What the SmolLM2 reference scripts share: where the model and the
fixtures live, the package versions each fixture records, and floats
written as the shortest decimals that read back as the same float32.
"""

import os
import platform

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests/reference/smollm2")
MODEL = os.path.join(ROOT, ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf")


def f32(values):
    """Shortest decimal strings that read back as the same float32 values."""
    return [float(str(np.float32(v))) for v in np.asarray(values, dtype=np.float32).ravel()]


def versions():
    """Versions of the packages involved (null where not installed)."""
    from importlib.metadata import version
    out = {"python": platform.python_version()}
    for key, pkg in (("llama_cpp", "llama_cpp_python"), ("transformers", "transformers"),
                     ("torch", "torch"), ("gguf", "gguf"), ("tokenizers", "tokenizers"),
                     ("numpy", "numpy"), ("accelerate", "accelerate")):
        try:
            out[key] = version(pkg)
        except Exception:
            out[key] = None
    return out
