"""A run's journal (DESIGN.md section 5): its records, the one reader, the one
writer, the copies a shared store keeps, and what each audience may see of it."""
