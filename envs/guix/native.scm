;; The native StarPU 1.4 (MPI, FxT for `testbed simulate --engine real --trace`), from guix-hpc.
;; A profile of its own (it collides with starpu-simgrid): STARPU_NATIVE_PREFIX. UNTESTED (channels.scm).
(specifications->manifest (list "starpu-fxt"))
