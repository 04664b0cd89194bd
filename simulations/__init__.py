"""Runnable scenarios, the secagg-dp CLI, configs and plots, built on protocols and secagg_dp."""
