;; Everything but StarPU: the build tools, SimGrid (pkg-config `simgrid` for numasim and smpicc for
;; apps/lu), MPI, BLAS and Python. UNTESTED (see channels.scm).
;; StarPU comes from two profiles of its own, native.scm and simgrid.scm: `starpu-fxt` and
;; `starpu-simgrid` install the same files (include/starpu/1.4, lib/pkgconfig/starpu-1.4.pc) and
;; collide in one profile. envs/guix/run.sh hands them to the project as STARPU_NATIVE_PREFIX and
;; STARPU_SIMGRID_PREFIX (README, "Without root, with StarPU already installed").
;; Python packages: envs/setup.sh makes .venv from this profile's python with pip and the pinned
;; envs/requirements.txt (Snakemake >= 9, which Guix may not package; pandas, SALib, ...).
(specifications->manifest
 (list "bash" "coreutils" "findutils" "grep" "sed" "gawk" "tar" "gzip" "xz" "patch" "which"
       "make" "git" "gcc-toolchain" "cmake" "ninja" "pkg-config"
       "simgrid" "openmpi" "hwloc" "hwloc:lib" "openblas" "lapack" "fxt"
       "googletest" "nlohmann-json" "libxslt" "libxml2" "clang" ; clang-format
       "python" "nss-certs"))
