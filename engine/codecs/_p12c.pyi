"""Types of the compiled P12 loops (``_p12c.c``). They take any contiguous buffer; the codec
passes numpy arrays (whose stubs declare the buffer protocol only from Python 3.12)."""

from typing import Any

from numpy.typing import NDArray

def histogram(values: NDArray[Any], counts: NDArray[Any], blocks: int, block: int, /) -> None: ...
def pack(
    values: NDArray[Any], index_of: NDArray[Any], payload: NDArray[Any], escapes: NDArray[Any], /
) -> int: ...
def unpack(
    payload: NDArray[Any],
    exponents: NDArray[Any],
    escape_index: NDArray[Any],
    escape_values: NDArray[Any],
    out: NDArray[Any],
    /,
) -> None: ...
