"""Reading and writing files safely: bounds on values read, atomic writes, staging folders."""
