from collections.abc import Sequence

import numpy as np

def gather(
    values: Sequence[np.ndarray],
    chunk: np.ndarray | None,
    lo: np.ndarray,
    sizes: np.ndarray,
    out: np.ndarray,
    eos: int,
) -> None: ...
def doc_ids(starts: np.ndarray, out: np.ndarray, length: int) -> None: ...
