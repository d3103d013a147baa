;; Channels for rerunning the testbed with Guix.
;;   bash envs/guix/run.sh make test        (builds the three profiles of envs/guix/, then runs)
;;
;; UNTESTED: no Guix daemon, channel server or substitute server is reachable from the machine
;; this project is developed and tested on, so none of envs/guix/ has been run. envs/setup.sh on
;; Debian bookworm (and envs/docker/) is the tested path.
;;
;; Both channels are pinned to one pair of commits that Guix itself resolved together: the
;; `guix describe -f channels` output published on 2025-09-03 in the public gist
;; gist.github.com/dominicusin/a94364c9e2c9e742d0c94dc58a706361 (channels fetched from these
;; same URLs). Nothing reachable from here can check the commits against gitlab.inria.fr or
;; git.guix.gnu.org, and the pair has not been built here. guix-hpc carries StarPU 1.4
;; (`starpu-fxt`, `starpu-simgrid`, module (inria storm)) and has no channel introduction. An
;; earlier version of this file said Guix >= 1.5 refuses a channel without one; the published
;; setup pulled guix-hpc without one, so its Guix accepted it (not checked here). The guix channel
;; keeps its official introduction. This pair is older (2025-09) than the v1.5.0 release pinned
;; before; it replaces it because the two commits were resolved together. To move both forward together:
;;   guix pull -C <this file without the commit lines> && guix describe -f channels > channels.scm
(list (channel
        (name 'guix)
        (url "https://git.guix.gnu.org/guix.git")
        (branch "master")
        (commit "b377ec079d9ffe8f0f372c43735ad012ea889b6f")
        (introduction
         (make-channel-introduction
          "9edb3f66fd807b096b48283debdcddccfea34bad"
          (openpgp-fingerprint
           "BBB0 2DDF 2CEA F6A8 0D1D  E643 A2A0 6DF2 A33A 54FA"))))
      (channel
        (name 'guix-hpc)
        (url "https://gitlab.inria.fr/guix-hpc/guix-hpc.git")
        (branch "master")
        (commit "383fd2297febd03401d2b70c29db6eaff8c6384d")))
