"""How envelopes move between ranks: the interface, the wire codec and the drivers.

This package never imports ``simcluster``.
"""
