"""`mpigrad.hub`: torch.hub's downloads of weights. `load_state_dict_from_url` fetches a
checkpoint once into a cache directory (torch's: `$TORCH_HOME/hub/checkpoints`, so files torch
already fetched are reused) and loads it with `mpigrad.load`; any URL urllib opens works,
`file://` included. Loading is `weights_only=True` unless asked otherwise: a file from the
network is the case that setting exists for (torch's default here is False).

Fetching and running a repository's `hubconf.py` (`torch.hub.load`) is not supported."""
import hashlib
import os
import re
import shutil
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request

from . import serialization

# torch's rule: a file named name-<hex>.ext is checked against the hex's prefix of its SHA-256.
_HASH_IN_NAME = re.compile(r"-([a-f0-9]*)\.")

_hub_dir = [None]


def get_dir():
    """The hub cache directory: set_dir's, else $TORCH_HOME/hub, else
    $XDG_CACHE_HOME/torch/hub, else ~/.cache/torch/hub (torch's order)."""
    if _hub_dir[0] is not None:
        return _hub_dir[0]
    cache = os.getenv("XDG_CACHE_HOME", os.path.join("~", ".cache"))
    return os.path.join(os.path.expanduser(os.getenv("TORCH_HOME",
                                                     os.path.join(cache, "torch"))), "hub")


def set_dir(d):
    _hub_dir[0] = os.path.expanduser(os.fspath(d))


def download_url_to_file(url, dst, hash_prefix=None, progress=True):
    """Copy `url` to the path `dst`, through a temporary in dst's directory renamed into
    place, so an interrupted download never leaves a partial `dst`. With `hash_prefix`, the
    file's SHA-256 must start with it (RuntimeError otherwise, and nothing is kept)."""
    directory = os.path.dirname(os.path.abspath(dst))
    os.makedirs(directory, exist_ok=True)
    try:
        response = urllib.request.urlopen(url)
    except urllib.error.URLError as error:
        raise urllib.error.URLError(
            f"cannot download {url}: {error.reason}. Without network access, fetch the file "
            f"elsewhere and put it at {dst}") from error
    digest = hashlib.sha256()
    with response, tempfile.NamedTemporaryFile(dir=directory, delete=False) as temporary:
        try:
            while True:
                chunk = response.read(1 << 20)
                if not chunk:
                    break
                temporary.write(chunk)
                digest.update(chunk)
            temporary.close()
            if hash_prefix is not None and not digest.hexdigest().startswith(hash_prefix):
                raise RuntimeError(f'invalid hash value (expected "{hash_prefix}", got '
                                   f'"{digest.hexdigest()}")')
            shutil.move(temporary.name, dst)
        finally:
            if os.path.exists(temporary.name):
                os.remove(temporary.name)


def load_state_dict_from_url(url, model_dir=None, map_location=None, progress=True,
                             check_hash=False, file_name=None, weights_only=True):
    """The object saved at `url`, downloaded once into `model_dir` (default
    `get_dir()/checkpoints`) under `file_name` or the URL's file name, then loaded with
    `mpigrad.load` (torch's formats and mpigrad's). With `check_hash`, a `-<hex>.` in the
    file name is the expected SHA-256 prefix."""
    if model_dir is None:
        model_dir = os.path.join(get_dir(), "checkpoints")
    os.makedirs(model_dir, exist_ok=True)
    filename = file_name or os.path.basename(urllib.parse.urlparse(url).path)
    cached_file = os.path.join(model_dir, filename)
    if not os.path.exists(cached_file):
        sys.stdout.write(f'Downloading: "{url}" to {cached_file}\n')
        match = _HASH_IN_NAME.search(filename) if check_hash else None
        download_url_to_file(url, cached_file, match.group(1) if match else None, progress)
    return serialization.load(cached_file, map_location=map_location, weights_only=weights_only)


def load(repo_or_dir, model, *args, **kwargs):
    raise NotImplementedError("mpigrad.hub.load: running a repository's hubconf.py is not "
                              "supported; build the model in your script and load its "
                              "weights with load_state_dict_from_url")
