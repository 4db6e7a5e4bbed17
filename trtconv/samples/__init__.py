"""Layer samples: where input data comes from (npz/npy files, image folders, random draws), shaped for a model."""
