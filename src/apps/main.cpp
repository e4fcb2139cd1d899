// apps/main.cpp — placeholder entry; replaced by the subcommand dispatcher.
int main() { return 0; }
