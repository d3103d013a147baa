;; Packages for the testbed under Guix (guix-hpc provides starpu-simgrid).
;; Not exercised by this project's CI; envs/setup.sh is the tested path.
;; SALib (testbed sensitivity) is not listed: install it with pip (envs/requirements.txt).
(specifications->manifest
 (list "starpu-simgrid" "starpu" "simgrid" "hwloc" "openblas" "lapack" "openmpi"
       "gcc-toolchain" "cmake" "ninja" "pkg-config" "googletest" "libxslt"
       "snakemake" "python" "python-pandas" "python-statsmodels" "python-matplotlib"
       "python-pyyaml" "python-jsonschema" "python-lxml" "python-pytest"))
