"""No Apple GPU backend in mpigrad."""


def is_available():
    return False


def is_built():
    return False
