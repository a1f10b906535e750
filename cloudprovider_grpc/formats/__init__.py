"""File and wire formats that several clouds read: Go templates, git-config (gcfg) files, and the
request signatures of cloud APIs, shared by a cloud's client and its emulator. It imports nothing
else of the package but core, so any cloud may use it without importing another."""
