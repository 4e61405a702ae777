"""llama.cpp: the backend (the only module that imports llama_cpp), its build checks (AMX), threads and
their governor, CPU weight copies, and the kept calibration.
"""
