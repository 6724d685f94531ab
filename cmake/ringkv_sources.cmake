# The library's sources: one list, read by the top-level build
# (CMakeLists.txt) and by the GPU machine's standalone build
# (tests/cuda/CMakeLists.txt), instead of each globbing or reading the
# sources' text. The core (src/: geometry, layers, visibility, the model over
# a backend table, snapshots; no engine, no GPU type) and the CPU backend's
# room (src/cpu/: its storage, the attention engines, the thread pool, the
# CPU table). Paths are relative to the repository root.
set(RKV_SOURCES
  src/status.c
  src/args.c
  src/dtype.c
  src/geometry.c
  src/layer.c
  src/visibility.c
  src/backend.c
  src/model.c
  src/model_frame.c
  src/model_offload.c
  src/model_page.c
  src/copy_hash.c
  src/model_regions.c
  src/presets.c
  src/snapshot_header.c
  src/snapshot_file.c
  src/atomic_file.c
  src/cpu/attention_reference.c
  src/cpu/attention_flash.c
  src/cpu/attention_amx.c
  src/cpu/isa.c
  src/cpu/threadpool.c
  src/cpu/backend_cpu.c
)
# The ones that need Jansson and xxHash (snapshot files, and the files that
# call their code): the GPU check's build leaves them out where its image
# lacks those libraries.
set(RKV_SOURCES_SNAPSHOT_DEPS
  src/args.c
  src/copy_hash.c
  src/model.c
  src/model_page.c
  src/model_regions.c
  src/snapshot_file.c
  src/snapshot_header.c
)
