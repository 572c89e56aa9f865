"""cuDNN flags scripts set (`benchmark`, `deterministic`, `enabled`, `allow_tf32`); mpigrad
has no cuDNN, so they are plain attributes with torch's defaults and no effect."""
enabled = True
benchmark = False
deterministic = False
allow_tf32 = True


def version():
    return None


def is_available():
    return False
