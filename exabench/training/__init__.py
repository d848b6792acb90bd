"""The framework layer every deep-learning workload shares: torch.distributed (NCCL, Gloo, MPI),
Horovod and mpi4py set-up, tf.distribute for Keras, training loops, learning-rate rules and
optimizers (LARC, LAMB). Frameworks are imported by the modules that need them, not here."""
