"""ember.hub against torch.hub, offline: hubconf repositories in tmp_path (local, and 'github'
ones served from the hub cache), file:// downloads, hash checks, trust prompts, errors."""
import hashlib
import os
import re
import zipfile
from pathlib import Path
from urllib.error import URLError
from urllib.request import urlopen

import pytest

import ember
import ember.hub as hub

torch = pytest.importorskip("torch")
thub = torch.hub

HUBCONF = '''
"""A test repository."""
dependencies = ["numpy"]
from helper import VALUE   # the repository's own module, importable from hubconf


def answer(x=1, *, scale=2):
    """Returns VALUE * x * scale."""
    return VALUE * x * scale


def _private():
    return 0


not_callable = 3
'''


@pytest.fixture(autouse=True)
def hub_dirs(tmp_path, monkeypatch):
    """Both hubs' cache dirs in tmp_path; no network (urlopen raises as it would offline)."""
    old = hub._hub_dir, thub._hub_dir
    hub.set_dir(tmp_path / "hub")
    thub.set_dir(str(tmp_path / "hub"))
    os.makedirs(tmp_path / "hub")

    def offline(url, *a, **k):
        if not getattr(url, "full_url", url).startswith("file:"):
            raise URLError("offline (test)")
        return urlopen(url, *a, **k)
    monkeypatch.setattr(hub, "urlopen", offline)
    monkeypatch.setattr(thub, "urlopen", offline)
    yield tmp_path / "hub"
    hub._hub_dir, thub._hub_dir = old


def _repo(path, hubconf=HUBCONF):
    path.mkdir(parents=True)
    (path / "hubconf.py").write_text(hubconf)
    (path / "helper.py").write_text("VALUE = 7\n")
    return path


def test_local_load_list_help_as_torch(tmp_path):
    repo = str(_repo(tmp_path / "repo"))
    for h in (hub, thub):
        assert h.load(repo, "answer", 3, source="local", scale=10) == 210
        assert h.load(repo, "answer", source="LOCAL") == 14
    with pytest.raises(ValueError, match='Unknown source: "zip". Allowed values'):
        hub.load(repo, "answer", source="zip")
    for bad, exc, msg in (("nothing", RuntimeError, "Cannot find callable nothing in hubconf"),
                          ("not_callable", RuntimeError, "Cannot find callable not_callable"),
                          (3, ValueError, "model should be a string of function name")):
        for h in (hub, thub):
            with pytest.raises(exc, match=msg):
                h.load(repo, bad, source="local")


def test_missing_dependencies_raise_as_torch(tmp_path):
    repo = str(_repo(tmp_path / "repo", 'dependencies = ["numpy", "no_such_pkg_xyz"]\n'
                                        'def f():\n    return 1\n'))
    for h in (hub, thub):
        with pytest.raises(RuntimeError, match="Missing dependencies: no_such_pkg_xyz"):
            h.load(repo, "f", source="local")


def test_github_repos_are_served_from_the_cache(hub_dirs, capsys):
    _repo(hub_dirs / "someone_models_main")
    _repo(hub_dirs / "someone_models_v1.0")
    for h in (hub, thub):
        assert h.list("someone/models:main", trust_repo=True) == ["answer"]
        assert h.help("someone/models:v1.0", "answer", trust_repo=True) == \
            "Returns VALUE * x * scale."
        assert h.load("someone/models:main", "answer", 2, trust_repo=True) == 28
    assert f"Using cache found in {hub_dirs / 'someone_models_main'}" in capsys.readouterr().err
    # no ref: the cached main (then master) answers, where torch would ask GitHub
    assert hub.load("someone/models", "answer", trust_repo=True) == 14
    # NOTE: as in torch, a repository already in the cache counts as trusted (the cache
    # predates the trusted list), so nothing was asked nor added
    assert (hub_dirs / "trusted_list").read_text() == ""


def test_a_missing_repo_names_the_cache_path(hub_dirs):
    with pytest.raises(RuntimeError, match=re.escape(
            f"not in the hub cache (looked for {hub_dirs / 'nobody_nothing_dev'})")):
        hub.load("nobody/nothing:dev", "answer", trust_repo=True)
    # without a ref, torch's message for the offline case
    for h in (hub, thub):
        with pytest.raises(RuntimeError, match=re.escape(
                "It looks like there is no internet connection and the repo could not be "
                f"found in the cache ({hub_dirs})")):
            h.list("nobody/nothing", trust_repo=True)
    (hub_dirs / "empty_repo_main").mkdir()
    with pytest.raises(FileNotFoundError, match="no hubconf.py in"):
        hub.list("empty/repo:main", trust_repo=True)


@pytest.mark.parametrize("answer,exc", [("n", Exception), ("", Exception), ("maybe", ValueError),
                                        ("y", None)])
def test_trust_repo_prompts_as_torch(hub_dirs, monkeypatch, answer, exc):
    prompts = []
    monkeypatch.setattr("builtins.input", lambda p: prompts.append(p) or answer)
    for h in (hub, thub):
        (hub_dirs / "trusted_list").write_text("")
        # (not cached: once trusted, the download is tried, and fails offline)
        with pytest.raises(exc or (RuntimeError, URLError),
                           match="Untrusted repository|Unrecognized response maybe|offline"):
            h.list("stranger/repo:dev", trust_repo="check")
        assert (hub_dirs / "trusted_list").read_text() == ("stranger_repo\n" if exc is None
                                                           else "")
    assert len(prompts) == 2 and prompts[0] == prompts[1]
    assert "The repository stranger_repo does not belong to the list" in prompts[0]
    # pytorch's own repositories are trusted without asking; trust_repo=False always asks
    _repo(hub_dirs / "pytorch_vision_main")
    assert hub.list("pytorch/vision:main", trust_repo="check") == ["answer"]
    assert len(prompts) == 2
    if exc is None:
        hub.list("pytorch/vision:main", trust_repo=False)
        assert len(prompts) == 3


def test_download_url_to_file_checks_the_hash_prefix(tmp_path):
    src = tmp_path / "data.bin"
    src.write_bytes(os.urandom(300_000))       # more than one read chunk
    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    hub.download_url_to_file(src.as_uri(), str(tmp_path / "ok.bin"), digest[:10], progress=False)
    assert (tmp_path / "ok.bin").read_bytes() == src.read_bytes()
    for h in (hub, thub):
        with pytest.raises(RuntimeError, match=f'invalid hash value \\(expected "abc", got '
                                               f'"{digest}"\\)'):
            h.download_url_to_file(src.as_uri(), str(tmp_path / "bad.bin"), "abc", False)
    assert sorted(os.listdir(tmp_path)) == ["data.bin", "hub", "ok.bin"]   # no partial file


def test_load_state_dict_from_url_caches_and_checks_the_hash(tmp_path, hub_dirs, capsys):
    src_dir = tmp_path / "src"
    src_dir.mkdir()
    plain = src_dir / "weights.pt"
    torch.save({"w": torch.arange(4.0), "b": torch.tensor([1, 2])}, plain)
    digest = hashlib.sha256(plain.read_bytes()).hexdigest()
    named = src_dir / f"weights-{digest[:8]}.pt"
    named.write_bytes(plain.read_bytes())
    sd = hub.load_state_dict_from_url(named.as_uri(), check_hash=True, progress=False)
    assert sd["w"].tolist() == [0.0, 1.0, 2.0, 3.0] and sd["b"].dtype == ember.int64
    cached = hub_dirs / "checkpoints" / named.name
    assert f'Downloading: "{named.as_uri()}" to {cached}' in capsys.readouterr().out
    named.unlink()                               # served from the cache from now on
    assert hub.load_state_dict_from_url(named.as_uri())["w"].tolist() == [0, 1, 2, 3]
    assert capsys.readouterr().out == ""
    tsd = thub.load_state_dict_from_url(named.as_uri())   # torch reads the same cache
    assert tsd["w"].tolist() == [0, 1, 2, 3]
    # a wrong hash in the name: nothing cached, torch's error
    wrong = src_dir / "weights-deadbeef.pt"
    wrong.write_bytes(plain.read_bytes())
    with pytest.raises(RuntimeError, match='invalid hash value \\(expected "deadbeef"'):
        hub.load_state_dict_from_url(wrong.as_uri(), check_hash=True, progress=False)
    assert not (hub_dirs / "checkpoints" / wrong.name).exists()
    # file_name and model_dir
    sd = hub.load_state_dict_from_url(plain.as_uri(), model_dir=str(tmp_path / "m"),
                                      file_name="renamed.pt", progress=False)
    assert (tmp_path / "m" / "renamed.pt").exists() and sd["b"].tolist() == [1, 2]


def test_legacy_zipped_checkpoint(tmp_path):
    ember.save({"w": ember.ones(2)}, tmp_path / "inner.pt")
    with zipfile.ZipFile(tmp_path / "legacy.zip", "w") as z:
        z.write(tmp_path / "inner.pt", "inner.pt")
    with pytest.warns(FutureWarning, match="Falling back to the old format < 1.6"):
        sd = hub.load_state_dict_from_url((tmp_path / "legacy.zip").as_uri(),
                                          model_dir=str(tmp_path / "m"), progress=False)
    assert sd["w"].tolist() == [1.0, 1.0]


def test_hub_dir_from_the_environment(monkeypatch, tmp_path):
    hub._hub_dir = thub._hub_dir = None
    for var in ("EMBER_HOME", "TORCH_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    assert hub.get_dir() == thub.get_dir() == os.path.expanduser("~/.cache/torch/hub")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert hub.get_dir() == thub.get_dir() == str(tmp_path / "xdg" / "torch" / "hub")
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "th"))
    assert hub.get_dir() == thub.get_dir() == str(tmp_path / "th" / "hub")
    monkeypatch.setenv("EMBER_HOME", str(tmp_path / "eh"))    # ember's own wins
    assert hub.get_dir() == str(tmp_path / "eh" / "hub")
    hub.set_dir("~/x")
    assert hub.get_dir() == os.path.expanduser("~/x")
    assert Path(hub.get_dir()).is_absolute()


def test_zip_extraction_refuses_escaping_entries(tmp_path):
    with zipfile.ZipFile(tmp_path / "evil.zip", "w") as z:
        z.writestr("../outside.txt", "x")
    with zipfile.ZipFile(tmp_path / "evil.zip") as z:
        with pytest.raises(ValueError, match="directory traversal: ../outside.txt"):
            hub._safe_extract_zip(z, tmp_path / "out")
