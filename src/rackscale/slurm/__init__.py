"""Slurm integration: topology.conf generation, importing a running Slurm as a cluster spec, the commands the
``slurm`` backend runs, an emulated Slurm cluster for tests and benchmarks, and the rackscale-vs-Slurm
comparison. Everything here talks to Slurm through its command-line tools (argv lists, never a shell)."""
