"""The data sera ships: the paper's reference numbers, the difficulty profiles and the stored
studies, installed as the package resource sera._data and read through sera.runstore."""
