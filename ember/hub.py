"""``torch.hub``: load models from a ``hubconf.py``, and weights from URLs, through a cache.

A repository is a directory with a ``hubconf.py`` whose public callables are its entrypoints
(its ``dependencies`` list names the packages it needs). ``source='local'`` loads from a
directory; ``source='github'`` from ``'owner/name[:ref]'``, served from the hub cache
``<hub dir>/<owner>_<name>_<ref>`` (where torch keeps it too) and downloaded from GitHub's
zipball only when it is not there. The hub dir is ``set_dir``'s, else ``$EMBER_HOME/hub``, else
``$TORCH_HOME/hub``, else ``$XDG_CACHE_HOME/torch/hub`` (``~/.cache/torch/hub``): by default
ember shares torch's cache, so what torch downloaded, ember loads offline.

``load_state_dict_from_url`` caches a file under ``<hub dir>/checkpoints`` and loads it with
``ember.load``; any URL ``urllib`` opens works, ``file://`` ones included. With
``check_hash=True`` the file name's ``-<hex>.`` part must prefix the file's SHA-256.

Unlike torch, ember does not ask GitHub's API whether ``ref`` belongs to the repository (a
fork's commit) before downloading: ``skip_validation`` is accepted and changes nothing.
See https://pytorch.org/docs/stable/hub.html.
"""
import contextlib
import errno
import hashlib
import os
import re
import shutil
import sys
import tempfile
import uuid
import warnings
import zipfile
from pathlib import Path
from urllib.error import HTTPError, URLError
from urllib.parse import urlparse
from urllib.request import Request, urlopen

__all__ = ["download_url_to_file", "get_dir", "help", "list", "load",
           "load_state_dict_from_url", "set_dir"]

HASH_REGEX = re.compile(r"-([a-f0-9]*)\.")
_TRUSTED_REPO_OWNERS = ("facebookresearch", "facebookincubator", "pytorch", "fairinternal")
MODULE_HUBCONF = "hubconf.py"
READ_DATA_CHUNK = 128 * 1024
_hub_dir = None


class _Faketqdm:
    """The progress bar when tqdm is not installed: a percentage on stderr."""

    def __init__(self, total=None, disable=False, unit=None, *args, **kwargs):
        self.total, self.disable, self.n = total, disable, 0

    def update(self, n):
        if not self.disable:
            self.n += n
            sys.stderr.write(f"\r{self.n:.1f} bytes" if self.total is None else
                             f"\r{100 * self.n / float(self.total):.1f}%")
            sys.stderr.flush()

    def set_description(self, *args, **kwargs):
        """(tqdm's; this plain progress bar shows no description.)"""

    def write(self, s):
        sys.stderr.write(f"{s}\n")

    def close(self):
        self.disable = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if not self.disable:
            sys.stderr.write("\n")


try:
    from tqdm import tqdm
except ImportError:
    tqdm = _Faketqdm


def get_dir():
    """The hub cache directory (see the module docstring for how it is chosen).

    Example:
        >>> import os, ember
        >>> ember.hub.get_dir().endswith(os.path.join("", "hub"))
        True
    """
    if os.getenv("TORCH_HUB"):
        warnings.warn("TORCH_HUB is deprecated, please use env TORCH_HOME instead", stacklevel=2)
    if _hub_dir is not None:
        return _hub_dir
    home = os.getenv("EMBER_HOME") or os.getenv("TORCH_HOME") or os.path.join(
        os.getenv("XDG_CACHE_HOME", "~/.cache"), "torch")
    return os.path.join(os.path.expanduser(home), "hub")


def set_dir(d):
    """Sets the hub cache directory (``~`` expanded), overriding the environment.

    Example:
        >>> import ember, tempfile
        >>> old = ember.hub.get_dir()
        >>> ember.hub.set_dir(tempfile.gettempdir())
        >>> ember.hub.get_dir() == tempfile.gettempdir()
        True
        >>> ember.hub.set_dir(old)
    """
    global _hub_dir
    _hub_dir = os.path.expanduser(d)


def _parse_repo_info(github):
    repo_info, ref = github.split(":") if ":" in github else (github, None)
    owner, name = repo_info.split("/")
    if ref is None:
        # torch asks GitHub whether `main` exists; a cached main or master answers first here
        for ref in ("main", "master"):
            if os.path.exists(os.path.join(get_dir(), f"{owner}_{name}_{ref}")):
                return owner, name, ref
        try:
            with urlopen(f"https://github.com/{owner}/{name}/tree/main/"):
                ref = "main"
        except HTTPError as e:
            if e.code != 404:
                raise
            ref = "master"
        except URLError as e:
            raise RuntimeError("It looks like there is no internet connection and the repo "
                               f"could not be found in the cache ({get_dir()})") from e
    return owner, name, ref


def _check_repo_is_trusted(owner, name, owner_name_branch, trust_repo):
    hub_dir = get_dir()
    path = os.path.join(hub_dir, "trusted_list")
    Path(path).touch()
    with open(path) as f:
        trusted = tuple(line.strip() for line in f)
    owner_name = f"{owner}_{name}"
    # (repositories cached before the trusted list existed count as trusted, as in torch)
    is_trusted = (owner_name in trusted or owner_name_branch in next(os.walk(hub_dir))[1] or
                  owner in _TRUSTED_REPO_OWNERS)
    if trust_repo is False or (trust_repo == "check" and not is_trusted):
        answer = input(f"The repository {owner_name} does not belong to the list of trusted "
                       "repositories and as such cannot be downloaded. Do you trust this "
                       "repository and wish to add it to the trusted list of repositories "
                       "(y/N)?").lower()
        if answer in ("y", "yes"):
            if is_trusted:
                print("The repository is already trusted.")
        elif answer in ("n", "no", ""):
            raise Exception("Untrusted repository.")
        else:
            raise ValueError(f"Unrecognized response {answer}.")
    if not is_trusted:
        with open(path, "a") as f:
            f.write(owner_name + "\n")


def _get_cache_or_reload(github, force_reload, trust_repo, verbose=True):
    hub_dir = get_dir()
    os.makedirs(hub_dir, exist_ok=True)
    owner, name, ref = _parse_repo_info(github)
    owner_name_branch = f"{owner}_{name}_{ref.replace('/', '_')}"
    repo_dir = os.path.join(hub_dir, owner_name_branch)
    _check_repo_is_trusted(owner, name, owner_name_branch, trust_repo)
    if not force_reload and os.path.exists(repo_dir):
        if verbose:
            sys.stderr.write(f"Using cache found in {repo_dir}\n")
        return repo_dir
    cached_zip = os.path.join(hub_dir, ref.replace("/", "_") + ".zip")
    url = f"https://github.com/{owner}/{name}/zipball/{ref}"
    sys.stdout.write(f'Downloading: "{url}" to {cached_zip}\n')
    try:
        download_url_to_file(url, cached_zip, progress=False)
    except URLError as e:
        raise RuntimeError(f"hub: {owner}/{name} at {ref} is not in the hub cache (looked for "
                           f"{repo_dir}) and could not be downloaded from {url}: "
                           f"{getattr(e, 'reason', e)}") from e
    with zipfile.ZipFile(cached_zip) as z:
        extracted = os.path.join(hub_dir, z.infolist()[0].filename)
        _remove_if_exists(extracted)
        _safe_extract_zip(z, hub_dir)
    _remove_if_exists(cached_zip)
    _remove_if_exists(repo_dir)
    shutil.move(extracted, repo_dir)
    return repo_dir


def _remove_if_exists(path):
    if os.path.isfile(path):
        os.remove(path)
    elif os.path.exists(path):
        shutil.rmtree(path)


def _safe_extract_zip(z, extract_to):
    """Extracts ``z``, refusing entries that would land outside ``extract_to``."""
    extract_to = Path(extract_to).resolve()
    for member in z.infolist():
        name = os.path.normpath(member.filename)
        if name.startswith(("/", "\\")) or (len(name) >= 2 and name[1] == ":"):
            raise ValueError(f"Archive entry has absolute path: {member.filename}")
        if ".." in re.split(r"[/\\]", name):
            raise ValueError(f"Archive entry contains directory traversal: {member.filename}")
        if not (extract_to / name).resolve().is_relative_to(extract_to):
            raise ValueError(f"Archive entry escapes target directory: {member.filename}")
        z.extract(member, extract_to)


@contextlib.contextmanager
def _hubconf(repo_dir):
    """The repository's ``hubconf`` module, imported with ``repo_dir`` on ``sys.path``."""
    import importlib.util
    path = os.path.join(repo_dir, MODULE_HUBCONF)
    if not os.path.isfile(path):
        raise FileNotFoundError(errno.ENOENT, f"hub: no {MODULE_HUBCONF} in {repo_dir}", path)
    sys.path.insert(0, repo_dir)
    try:
        spec = importlib.util.spec_from_file_location(MODULE_HUBCONF, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(repo_dir)


def _entry(module, model):
    import importlib.util
    if not isinstance(model, str):
        raise ValueError("Invalid input: model should be a string of function name")
    missing = [p for p in getattr(module, "dependencies", None) or ()
               if importlib.util.find_spec(p) is None]
    if missing:
        raise RuntimeError(f"Missing dependencies: {', '.join(missing)}")
    func = getattr(module, model, None) if model in dir(module) else None
    if func is None or not callable(func):
        raise RuntimeError(f"Cannot find callable {model} in hubconf")
    return func


def list(github, force_reload=False, skip_validation=False, trust_repo="check", verbose=True):
    """The entrypoints (public callables of ``hubconf.py``) of ``'owner/name[:ref]'``.

    Example:
        >>> import ember, os, tempfile
        >>> repo = tempfile.mkdtemp()
        >>> _ = open(os.path.join(repo, "hubconf.py"), "w").write("def tiny(): return 1")
        >>> old = ember.hub.get_dir()
        >>> ember.hub.set_dir(tempfile.mkdtemp())
        >>> os.rename(repo, os.path.join(ember.hub.get_dir(), "me_models_main"))
        >>> ember.hub.list("me/models", trust_repo=True, verbose=False)
        ['tiny']
        >>> ember.hub.set_dir(old)
    """
    with _hubconf(_get_cache_or_reload(github, force_reload, trust_repo, verbose)) as m:
        return [f for f in dir(m) if callable(getattr(m, f)) and not f.startswith("_")]


def help(github, model, force_reload=False, skip_validation=False, trust_repo="check"):
    """The docstring of entrypoint ``model`` of ``'owner/name[:ref]'``."""
    with _hubconf(_get_cache_or_reload(github, force_reload, trust_repo, True)) as m:
        return _entry(m, model).__doc__


def load(repo_or_dir, model, *args, source="github", trust_repo="check", force_reload=False,
         verbose=True, skip_validation=False, **kwargs):
    """Calls entrypoint ``model`` of a repository (``source='github'``, ``'owner/name[:ref]'``)
    or a directory (``source='local'``) with ``*args, **kwargs`` and returns what it returns.

    Example:
        >>> import ember, os, tempfile
        >>> repo = tempfile.mkdtemp()
        >>> code = "import ember\\ndef linear(n=2):\\n    return ember.nn.Linear(n, 1)\\n"
        >>> _ = open(os.path.join(repo, "hubconf.py"), "w").write(code)
        >>> ember.hub.load(repo, "linear", 3, source="local")
        Linear(in_features=3, out_features=1, bias=True)
    """
    source = source.lower()
    if source not in ("github", "local"):
        raise ValueError(f'Unknown source: "{source}". Allowed values: "github" | "local".')
    if source == "github":
        repo_or_dir = _get_cache_or_reload(repo_or_dir, force_reload, trust_repo, verbose)
    with _hubconf(repo_or_dir) as m:
        return _entry(m, model)(*args, **kwargs)


def download_url_to_file(url, dst, hash_prefix=None, progress=True):
    """Downloads ``url`` (any scheme urllib opens: https, file...) to ``dst`` through a
    temporary file; with ``hash_prefix``, the file's SHA-256 must start with it, or
    ``RuntimeError`` and nothing is written.

    Example:
        >>> import ember, os, pathlib, tempfile
        >>> d = tempfile.mkdtemp()
        >>> src = os.path.join(d, "a.txt")
        >>> _ = open(src, "w").write("hi")
        >>> ember.hub.download_url_to_file(pathlib.Path(src).as_uri(), os.path.join(d, "b.txt"),
        ...                                progress=False)
        >>> open(os.path.join(d, "b.txt")).read()
        'hi'
    """
    dst = os.path.expanduser(dst)
    tmp = dst + "." + uuid.uuid4().hex + ".partial"
    f = open(tmp, "w+b")
    try:
        with urlopen(Request(url, headers={"User-Agent": "torch.hub"})) as u:
            size = u.info().get_all("Content-Length")
            sha256 = hashlib.sha256() if hash_prefix is not None else None
            with tqdm(total=int(size[0]) if size else None, disable=not progress, unit="B",
                      unit_scale=True, unit_divisor=1024) as bar:
                while buf := u.read(READ_DATA_CHUNK):
                    f.write(buf)
                    if sha256 is not None:
                        sha256.update(buf)
                    bar.update(len(buf))
        f.close()
        if sha256 is not None and sha256.hexdigest()[:len(hash_prefix)] != hash_prefix:
            raise RuntimeError(f'invalid hash value (expected "{hash_prefix}", got '
                               f'"{sha256.hexdigest()}")')
        shutil.move(f.name, dst)
    finally:
        f.close()
        if os.path.exists(f.name):
            os.remove(f.name)


def load_state_dict_from_url(url, model_dir=None, map_location=None, progress=True,
                             check_hash=False, file_name=None, weights_only=False):
    """Downloads ``url`` into ``model_dir`` (default ``<hub dir>/checkpoints``) unless a file
    of that name is there already, and loads it with ``ember.load``.

    Args:
        check_hash (bool): the ``-<hex>.`` part of the file name (``resnet18-f37072fd.pth``)
            must prefix the file's SHA-256. Default False.
        file_name (str): the cached file's name, instead of the URL's.

    Example:
        >>> import ember, os, pathlib, tempfile
        >>> d = tempfile.mkdtemp()
        >>> ember.save({"w": ember.ones(2)}, os.path.join(d, "weights.pt"))
        >>> url = pathlib.Path(d, "weights.pt").as_uri()
        >>> sd = ember.hub.load_state_dict_from_url(url, model_dir=os.path.join(d, "cache"),
        ...                                         progress=False)   # doctest: +ELLIPSIS
        Downloading: ...
        >>> sd["w"]
        tensor([1., 1.])
    """
    import ember
    if os.getenv("TORCH_MODEL_ZOO"):
        warnings.warn("TORCH_MODEL_ZOO is deprecated, please use env TORCH_HOME instead",
                      stacklevel=2)
    model_dir = os.path.join(get_dir(), "checkpoints") if model_dir is None else model_dir
    os.makedirs(model_dir, exist_ok=True)
    cached = os.path.join(model_dir, file_name or os.path.basename(urlparse(url).path))
    if not os.path.exists(cached):
        sys.stdout.write(f'Downloading: "{url}" to {cached}\n')
        r = HASH_REGEX.search(os.path.basename(cached)) if check_hash else None
        download_url_to_file(url, cached, r.group(1) if r else None, progress=progress)
    if zipfile.is_zipfile(cached):
        with zipfile.ZipFile(cached) as z:
            members = z.infolist()
            # a zip of one file is torch's pre-1.6 hub format: the checkpoint zipped
            if len(members) == 1 and not members[0].is_dir():
                warnings.warn("Falling back to the old format < 1.6. This support will be "
                              "deprecated in favor of default zipfile format introduced in "
                              "1.6. Please redo torch.save() to save it in the new zipfile "
                              "format.", FutureWarning, stacklevel=2)
                _safe_extract_zip(z, model_dir)
                cached = os.path.join(model_dir, members[0].filename)
    return ember.load(cached, map_location=map_location, weights_only=weights_only)

