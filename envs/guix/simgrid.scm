;; StarPU 1.4 on SimGrid (MPI, static), from guix-hpc. A profile of its own (it collides with the
;; native StarPU): STARPU_SIMGRID_PREFIX. UNTESTED (channels.scm).
(specifications->manifest (list "starpu-simgrid"))
