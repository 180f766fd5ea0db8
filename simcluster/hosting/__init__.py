"""Running the ranks in several processes: the hosting processes, their engine, the rounds among
them, and the coordinator that starts them and gathers the result (shm, tcp and mpi transports).
"""
