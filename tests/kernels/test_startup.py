"""Nothing compiles at import: numba is imported by a fused kernel's first call, not by
`import mpigrad` (nor by building a model and its optimizer)."""
import subprocess
import sys

PROGRAM = """
import sys
import mpigrad as mg
model = mg.nn.Sequential(mg.nn.Linear(4, 4), mg.nn.GELU(), mg.nn.LayerNorm(4))
optimizer = mg.optim.AdamW(model.parameters())
print("numba" in sys.modules)
model(mg.ones(2, 4))
print("numba" in sys.modules)
"""


def test_numba_is_imported_on_first_use_only():
    out = subprocess.run([sys.executable, "-c", PROGRAM], check=True, capture_output=True,
                         text=True, timeout=300).stdout.split()
    assert out == ["False", "True"]
