"""Sessions that leave and come back (issue 13): the binding's offload and
page-in (memory and files: bit-exact, clock continuing, the request id
reserved meanwhile, only the image that was offloaded comes back), its
session regions (= the snapshot's data section) and imports; and a
session offloaded and paged in through its Ray host mid-stream, which
then streams on exactly as one that never left."""
from __future__ import annotations

import numpy as np
import pytest

import ringkv
from ringkv import _lib

from ray_cluster import CONFIG, assert_live_once, hosts  # noqa: F401

pytestmark = pytest.mark.skipif(not _lib.has("rkv_model_offload"),
                                reason="the loaded library lacks rkv_model_offload")


def _streamed(frames, rid="a", sessions=2, **cfg):
    """A model whose session `rid` (plus one neighbour) ran `frames` frames."""
    from ringkv.ray.stream import step_frame
    model = ringkv.Model(ringkv.ModelConfig(**{**CONFIG.__dict__, "num_sessions": sessions,
                                               **cfg}))
    s, o = model.claim(rid), model.claim("neighbour")
    digests = [step_frame(model, [s, o], [rid, "neighbour"], [f, f])[0] for f in range(frames)]
    return model, s, digests


def test_offload_and_page_in_bit_exact():
    pytest.importorskip("xxhash")
    from ringkv.ray.stream import reference_digests, step_frame
    ref = reference_digests(CONFIG, "a", 8)
    model, s, digests = _streamed(4)
    assert digests == ref[:4]
    before = model.session_digest(s)
    image = model.offload(s)
    assert model.offloaded_count == 1 and model.offloaded_clock("a") == 3
    assert ringkv.inspect_snapshot(image).data_xxh3 == before
    with pytest.raises(RuntimeError, match="paged out"):
        model.claim("a")
    with pytest.raises(KeyError, match="paged out"):
        model.lookup("a")
    other = model.claim("b")                       # the slot is free for another request
    assert other == s
    model.release(other)
    back = model.page_in(image)
    assert model.offloaded_count == 0 and model.clock(back) == 3
    assert model.session_digest(back) == before
    for f in range(4, 8):
        assert step_frame(model, [back], ["a"], [f])[0] == ref[f]
    with pytest.raises(KeyError, match="not paged out"):   # an image pages in once
        model.page_in(image)


def test_offload_to_file_and_stale_images(tmp_path):
    pytest.importorskip("xxhash")
    from ringkv.ray.stream import step_frame
    model, s, _ = _streamed(3, max_offloaded=1)
    assert model.offload_capacity == 1 and model.config.max_offloaded == 1
    path = tmp_path / "a.safetensors"
    model.offload_to_file(s, path)
    with pytest.raises(RuntimeError, match="offload table is full"):
        model.offload(model.lookup("neighbour"))
    s = model.page_in_file(path)
    old = model.offload(s)
    s = model.page_in(old)
    step_frame(model, [s], ["a"], [3])
    new = model.offload(s)
    with pytest.raises(RuntimeError, match="not the one offloaded"):
        model.page_in(old)
    damaged = bytearray(new)
    damaged[-100] ^= 1
    with pytest.raises(ValueError, match="corrupted data"):
        model.page_in(damaged)
    assert model.offloaded_count == 1                      # still reserved
    model.offload_discard("a")
    with pytest.raises(KeyError):
        model.page_in(new)
    assert model.claim("a") >= 0


def test_page_in_takes_the_state_offloaded_whatever_keys_its_header_has():
    """The offload table pins the image's clock and data checksum, not its
    header: the image with a metadata key a tool added (the header
    checksum recomputed, as ringkv.ray adds the incarnation) pages in; an
    older image with the same added key is still refused, nothing changed."""
    pytest.importorskip("xxhash")
    from ringkv.ray.checkpoint import tag_image
    from ringkv.ray.stream import step_frame
    model, s, _ = _streamed(3)
    before = model.session_digest(s)
    old = tag_image(model.offload(s), {"tool": "x"})
    s = model.page_in(old)
    assert model.clock(s) == 2 and model.session_digest(s) == before
    step_frame(model, [s], ["a"], [3])
    image = model.offload(s)
    tagged = tag_image(image, {"tool": "y"})
    assert ringkv.inspect_snapshot(tagged).header_xxh3 != ringkv.inspect_snapshot(image).header_xxh3
    with pytest.raises(RuntimeError, match=r"not the one offloaded \(data_xxh3 [0-9a-f]{16}, "
                       r"clock 2; the offloaded image has [0-9a-f]{16}, clock 3\)"):
        model.page_in(old)
    assert model.offloaded_count == 1 and model.lookup("neighbour") >= 0
    s = model.page_in(tagged)
    assert model.clock(s) == 3 and model.offloaded_count == 0


def test_regions_and_import_between_models():
    pytest.importorskip("xxhash")
    src, s, _ = _streamed(5)
    regions = src.session_regions(s)
    assert len(regions) == 2 * 3
    assert [(r.layer, r.part, r.head) for r in regions[:3]] == [(0, "k", 0), (0, "v", 0),
                                                                (0, "written", 0)]
    image = src.save_session_bytes(s)
    data = b"".join(bytes(r.array) for r in regions)
    assert image.endswith(data)                              # the data section, in order
    dst = ringkv.Model(ringkv.ModelConfig(**{**CONFIG.__dict__, "num_sessions": 1}))
    meta = src.export_meta(s)
    slot = dst.import_reserve(meta)
    with pytest.raises(RuntimeError, match="being imported"):
        dst.claim("a")
    for d, r in zip(dst.session_regions(slot), regions):
        d.array[:] = r.array
    assert dst.session_digest(slot) == src.session_digest(s)
    dst.import_check(slot, meta)
    dst.import_session(slot, meta)
    assert dst.lookup("a") == slot and dst.clock(slot) == 4
    with pytest.raises(ValueError, match="wrong geometry.*n_layers"):  # another geometry
        ringkv.Model.from_preset("waypoint-1.5-360p").import_reserve(meta)
    np.testing.assert_array_equal(regions[2].array, dst.session_regions(slot)[2].array)


def test_offload_and_page_in_over_ray(ray_cluster, hosts):
    from ringkv.ray.stream import reference_digests
    hs, router = hosts
    rids = ["o0", "o1", "o2", "o3"]
    ref = {r: reference_digests(CONFIG, r, 7) for r in rids}
    for r in rids:
        router.open(r)
    for _ in range(3):
        router.step()
    host = router.where["o2"]
    nbytes = router.offload("o2")
    assert nbytes > 2 * 2 * (17 * 128) * 64 * 4                # the image: header + data
    load = ray_cluster.get(hs[host].load.remote())
    assert (load["live"], load["paged_out"]) == (1, 1)
    assert_live_once(router)
    for _ in range(2):                                         # the others stream on
        rep = router.step()
        assert "o2" not in rep.results
    assert router.page_in("o2") == host
    assert ray_cluster.get(hs[host].clock.remote("o2")) == 2
    assert_live_once(router)
    while min(router.last_frame[r] for r in rids) < 6:
        behind = [r for r in rids if router.last_frame[r] < 6]
        for r, res in router.step(behind).results.items():
            assert res["digest"] == ref[r][res["frame"]], (r, res["frame"])


@pytest.mark.parametrize("save", ["save_session", "offload_to_file"])
def test_saving_to_a_folder_is_refused_up_front(tmp_path, save):
    """A destination that cannot be a file (a folder, a folder that does not
    exist, a file used as a folder) is refused before anything is written,
    naming it (it used to be written in full to a temporary file beside it,
    then refused by rename: 'cannot rename ... Is a directory'). The session
    stays held, unchanged, its id not paged out."""
    pytest.importorskip("xxhash")
    model, s, _ = _streamed(2)
    before = model.session_digest(s)
    folder = tmp_path / "out"
    folder.mkdir()
    a_file = tmp_path / "file"
    a_file.write_bytes(b"x")
    name = {"save_session": "Model.save_session", "offload_to_file": "Model.offload_to_file"}
    cases = [(folder, f"'{folder}' is a folder; expected a file path"),
             (f"{folder}/", f"'{folder}/' is a folder; expected a file path"),
             (tmp_path / "missing" / "s.safetensors",
              f"folder '{tmp_path / 'missing'}': does not exist"),
             (a_file / "s.safetensors", f"'{a_file}' is not a folder")]
    for path, words in cases:
        with pytest.raises(ringkv.RingKVOSError) as e:
            getattr(model, save)(s, path)
        assert str(e.value).startswith(f"{name[save]}: ") and words in str(e.value), str(e.value)
        assert isinstance(e.value, OSError)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "out"]
        assert list(folder.iterdir()) == [] and a_file.read_bytes() == b"x"
        assert model.offloaded_count == 0 and model.lookup("a") == s
        assert model.session_digest(s) == before
    getattr(model, save)(s, folder / "s.safetensors")      # a file in that folder is fine
    assert ringkv.inspect_snapshot(folder / "s.safetensors").data_xxh3 == before
