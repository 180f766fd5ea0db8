"""The simulator itself: the kernel, the point-to-point protocol with its delivery, and the diagnostics.

``assembly.Engine`` puts one of each together; docs/design.md has the map.
"""
