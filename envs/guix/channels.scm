;; Channels for rerunning the testbed with Guix (not exercised by this project's CI).
;;   guix time-machine -C envs/guix/channels.scm -- shell -m envs/guix/manifest.scm
;; Pin the commits with `guix describe -f channels` after a first successful run.
(list (channel
        (name 'guix)
        (url "https://git.savannah.gnu.org/git/guix.git")
        (branch "master"))
      (channel
        (name 'guix-hpc)
        (url "https://gitlab.inria.fr/guix-hpc/guix-hpc.git")
        (branch "master")))
