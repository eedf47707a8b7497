"""The virtual device: registers, IOMMU, interrupts and the functional blocks."""
