"""The discrete-event engine: kernels on SMs (waves of CTAs as fluid flows), streams and links."""
