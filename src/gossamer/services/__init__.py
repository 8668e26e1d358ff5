"""services: what users run, built on protocols (replica, pubsub, appsync, activity, atomic).

For now: the FIFO broadcast demo workload that ``gossamer sim`` runs.
"""
