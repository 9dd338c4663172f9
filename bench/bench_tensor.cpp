// Placeholder: the tensor benchmarks come with the linalg work.
int main() { return 0; }
