"""A cluster dump's JSON parsed with its equal leaf objects shared.

A dump of 100,000 pods repeats the same small objects in every pod of a controller: the labels,
the owner reference, the container's requests, the status. `json.loads` makes a fresh dict (and
fresh value strings) for each; on the 5,000-node benchmark snapshot (a 42 MB dump) that was about
a third of the parsed tree. Here every object whose values are all scalars (a "leaf") is looked up
by its items, and an equal one parsed earlier is returned instead: the tree is the same JSON, only
smaller. The check is one pass over the object's values in the parser's hook; that Python call
per object costs about as much CPU again as the parse (0.7-1.0 s on the 42 MB dump), the price of
the third. Objects holding other objects, arrays or numbers are kept as parsed (numbers because
`1 == 1.0 == True` in Python: a leaf is shared only with one equal in type as well as value, and
no two of str, bool and None compare equal).

Sharing is safe because nothing reading a dump changes its objects in place: the converters copy
what they keep (`dict(...)`) and build new mappings for the scenario.
"""

from __future__ import annotations

import json
from typing import Any

#: the values of a shared leaf: hashable, and no value of one type equal to one of another
_SCALARS = frozenset({str, bool, type(None)})


def loads_shared(text: str) -> Any:
    """`json.loads(text)`, with equal leaf objects (all values strings, booleans or nulls) one
    shared dict."""
    seen: dict[tuple[tuple[str, Any], ...], dict[str, Any]] = {}
    share = seen.setdefault
    scalars = _SCALARS

    def leaf_shared(obj: dict[str, Any]) -> dict[str, Any]:
        for value in obj.values():
            if type(value) not in scalars:
                return obj
        return share(tuple(obj.items()), obj)

    return json.loads(text, object_hook=leaf_shared)
