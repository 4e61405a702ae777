"""What replies measured, shown: the stats panel, its charts, Compare."""
