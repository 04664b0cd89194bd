"""Protocol parties (client and server state machines, messages, rounds), built on secagg_dp."""
