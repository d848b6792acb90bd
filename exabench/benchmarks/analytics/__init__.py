"""The CORAL-2 analytics suite: K-Means, PCA and SVM over MPI."""
