"""Where LayerCut finds its data and keeps its caches: one home for each, read by every layer."""

from __future__ import annotations

from prune.core import paths

from conftest import REPO


def test_the_data_folder_is_the_setting_else_the_shared_folder_beside_the_repository(monkeypatch, tmp_path):
    monkeypatch.setenv(paths.DATA_DIR_ENV, str(tmp_path))
    assert paths.default_data_dir() == tmp_path
    monkeypatch.setenv(paths.DATA_DIR_ENV, "~/layercut-data")
    assert paths.default_data_dir() == paths.Path.home() / "layercut-data"
    monkeypatch.delenv(paths.DATA_DIR_ENV)
    shared = REPO.parent / "shared" / "benchdata"
    assert paths.default_data_dir() == (shared if shared.is_dir() else None)


def test_the_cache_root_is_the_setting_else_the_users_cache(monkeypatch, tmp_path):
    monkeypatch.setenv(paths.CACHE_ENV, str(tmp_path / "c"))
    assert paths.cache_root() == tmp_path / "c" and (tmp_path / "c").is_dir()
    monkeypatch.delenv(paths.CACHE_ENV)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert paths.cache_root() == tmp_path / "home" / ".cache" / "layercut"
