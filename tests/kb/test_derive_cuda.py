"""The cuda and driver rules on small inputs in each upstream format."""

from __future__ import annotations

import pytest

from gpuenv.kb.derive import Malformed
from gpuenv.kb.derive_cuda import CudaUpstream, cuda_rows, driver_releases, driver_rows, redist_patches, tag_page

ROW = {"version": "12.6", "build": "cu126", "toolkit": "12.6.2", "bundled_driver": "560.35.03", "eol": False,
       "deleted_tags": [], "source": "cuda-images", "checked": "2026-01-01"}  # fmt: skip


def test_patches_sort_as_versions_not_text() -> None:
    listing = "<html><pre>" + "".join(f'<a href="redistrib_12.6.{p}.json">x</a>' for p in (9, 10, 0)) + "</pre></html>"
    assert redist_patches(listing, "here") == {"12.6": ["12.6.0", "12.6.9", "12.6.10"]}


def test_a_listing_without_manifests_is_malformed() -> None:
    with pytest.raises(Malformed, match="links no redistrib"):
        redist_patches("<html><a href='redistrib_12.6.json'>old style</a></html>", "here")


def test_a_tag_of_another_patch_does_not_keep_one_alive() -> None:
    up = CudaUpstream({"12.6": ["12.6.3"]}, {"12.6.3": "560.35.05"}, frozenset({"12.6.30-base-ubuntu22.04"}), {})
    row = cuda_rows([ROW], up, "2026-11-30").rows[0]
    assert row["deleted_tags"] == ["12.6.3"] and row["eol"] is True  # every tag of 12.6 gone
    assert row["toolkit"] == "12.6.3" and row["bundled_driver"] == "560.35.05"


def test_tag_page_reads_the_next_link() -> None:
    page = {"count": 2, "next": "https://hub.docker.com/x?page=2", "results": [{"name": "12.6.3-base-ubuntu22.04"}]}
    assert tag_page(page, "here") == (["12.6.3-base-ubuntu22.04"], "https://hub.docker.com/x?page=2")
    with pytest.raises(Malformed, match="not a Docker Hub tag page"):
        tag_page({"results": [{"digest": "sha256:0"}]}, "here")


def test_driver_branch_types_and_newest_release() -> None:
    releases = [{"release_version": "580.9.1"}, {"release_version": "580.1.1"}]
    data = {"580": {"type": "lts branch", "driver_info": releases},
            "620": {"type": "new feature branch", "driver_info": []}}  # fmt: skip
    branches = driver_releases(data, "here")
    rows = driver_rows([{"branch": "R580", "lts": False, "kind": "production", "latest": None}], branches, "here", "d")
    assert rows.rows[0] == {"branch": "R580", "lts": True, "kind": "lts", "latest": "580.9.1", "checked": "d"}
    assert rows.rows[1]["branch"] == "R620" and rows.rows[1]["latest"] is None
