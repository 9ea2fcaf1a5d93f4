"""Task caches (`t5forge cache-tasks`): the cache's layout, writer and reader (store), the same
cache written by many Apache Beam workers (beam), and where tasks look for caches
(search_dirs)."""
