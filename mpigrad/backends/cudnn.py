"""cuDNN flags scripts set (`benchmark`, `deterministic`, `enabled`); mpigrad has no
cuDNN, so they are plain attributes with torch's defaults and no effect."""
enabled = True
benchmark = False
deterministic = False


def is_available():
    return False
