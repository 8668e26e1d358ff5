"""protocols: sans-I/O state machines (membership, dissemination, ordering) driven through an Env.

They import ``gossamer.core`` only, never a runtime.
"""
