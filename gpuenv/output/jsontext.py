"""The one JSON writer of reports and results: indented, and never a literal that is not JSON.

A figure a check could not measure can be NaN or infinite (a step that did not fit in memory);
Python's json would write `NaN`, which strict readers (jq, orjson, browsers) refuse. Every
non-finite float anywhere in the document is written as `null`, and `allow_nan=False` makes any
other way of writing one an error rather than a file nobody can read.
"""

from __future__ import annotations

import json
import math
from typing import Any


def json_text(document: Any) -> str:
    """The document as indented JSON and a newline; NaN and ±infinity become null."""
    try:
        return json.dumps(document, indent=2, allow_nan=False) + "\n"
    except ValueError:  # a non-finite float somewhere: the rare case pays for the walk
        return json.dumps(finite(document), indent=2, allow_nan=False) + "\n"


def finite(value: Any) -> Any:
    """A copy of a JSON document with every non-finite float replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    return value
