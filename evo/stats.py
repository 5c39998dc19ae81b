"""Summary statistics the reports share."""
from __future__ import annotations

import math


def geomean(xs) -> float:
    """Geometric mean of the positive values (None, NaN and non-positive ones left out); 0.0 when none is left."""
    xs = [x for x in xs if x is not None and x == x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else 0.0
