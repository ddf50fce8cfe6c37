"""Write ember/quasirandom/_directions.py: the Sobol' direction numbers of Joe & Kuo
(new-joe-kuo-6.21201, the table torch's SobolEngine and scipy's Sobol use) for the first
``DIMS`` dimensions, packed (zlib + base85). The table is read from scipy's copy and checked
against torch's initialized state before it is written.

    python tools/sobol_table.py
"""
import base64
import os
import zlib
from pathlib import Path

import numpy as np

DIMS = 1111
OUT = Path(__file__).resolve().parent.parent / "ember" / "quasirandom" / "_directions.py"


def main():
    import scipy
    import torch
    d = np.load(os.path.join(os.path.dirname(scipy.__file__),
                             "stats/_sobol_direction_numbers.npz"))
    poly, vinit = d["poly"][:DIMS], d["vinit"][:DIMS]
    flat = [int(DIMS)]
    for p, v in zip(poly, vinit):
        deg = int(p).bit_length() - 1
        flat += [int(p)] + [int(x) for x in v[:deg]]
    blob = base64.b85encode(zlib.compress(np.array(flat, np.uint32).tobytes(), 9)).decode()
    import sys
    sys.path.insert(0, str(OUT.parent.parent.parent))
    from ember.quasirandom import _state_from
    ref = torch.zeros(DIMS, 30, dtype=torch.long)
    torch._sobol_engine_initialize_state_(ref, DIMS)
    assert np.array_equal(_state_from(np.array(flat, np.uint32), DIMS), ref.numpy())
    lines = [blob[i:i + 96] for i in range(0, len(blob), 96)]
    OUT.write_text('"""Joe & Kuo\'s Sobol\' direction numbers (new-joe-kuo-6.21201) for the first '
                   f'{DIMS}\ndimensions, as torch\'s SobolEngine uses them: written by '
                   'tools/sobol_table.py (zlib + base85\nof uint32 [dims, then per dimension its '
                   'primitive polynomial and initial numbers])."""\n'
                   "PACKED = (\n" + "".join(f'    "{s}"\n' for s in lines) + ")\n")
    print(f"wrote {OUT} ({len(blob)} characters)")


if __name__ == "__main__":
    main()
