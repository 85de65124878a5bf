"""What people see of runs: status, the console, timelines, caller resources, disclosure."""
