;; Channels for rerunning the testbed with Guix.
;;   bash envs/guix/run.sh make test        (builds the three profiles of envs/guix/, then runs)
;;
;; UNTESTED: no Guix daemon, channel server or substitute server is reachable from the machine
;; this project is developed and tested on, so none of envs/guix/ has been run. envs/setup.sh on
;; Debian bookworm (and envs/docker/) is the tested path.
;;
;; guix: release v1.5.0 (2026-01-23), commit 230aa373f315f247852ee07dff34146e9b480aec, with the
;; official channel introduction (Guix >= 1.5 refuses a channel without one).
;; guix-hpc: StarPU 1.4 (`starpu`, `starpu-fxt`, `starpu-simgrid`, module (inria storm)). Not
;; pinned: no commit of it could be checked from here. After a first successful run, pin both
;; with `guix time-machine -C envs/guix/channels.scm -- describe -f channels > channels.scm`.
(list (channel
        (name 'guix)
        (url "https://git.guix.gnu.org/guix.git")
        (branch "master")
        (commit "230aa373f315f247852ee07dff34146e9b480aec")
        (introduction
         (make-channel-introduction
          "9edb3f66fd807b096b48283debdcddccfea34bad"
          (openpgp-fingerprint
           "BBB0 2DDF 2CEA F6A8 0D1D  E643 A2A0 6DF2 A33A 54FA"))))
      (channel
        (name 'guix-hpc)
        (url "https://gitlab.inria.fr/guix-hpc/guix-hpc.git")
        (branch "master")))
