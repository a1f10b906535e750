"""The shared machinery that turns a cloud's small driver into the full provider contract, in two
shapes over one shared part, composed of parts held as fields: `base.py`'s `GroupProvider` holds the
group core (`group_core.py`, owning the node index `node_index.py` and the state version
`state_version.py`, and calling a shape's hooks through `shape.py`'s protocol), the reads answered
from memory (`group_reads.py`), Refresh and the listing (`group_refresh.py`), the status
(`group_status.py`) and the rules a write must pass (`group_write_rules.py`); `machines/` is the
shape where the server owns the size, `pools/` the one where the cloud does. Beside them: the write
gate (`gate.py`), the background jobs (`jobs.py`), the `--state-file` journal (`journal.py`) and the
activity record (`activity.py`). It may import the contract and driver types, `http/`, `k8s/`,
`observability/` and `core/`; never a cloud's folder."""
