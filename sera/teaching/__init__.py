"""The teaching layer: the notebooks' runner and static site (`notebooks`, `notebook_files`),
their sliders (`widgets`), the course's exercises and feedback (`course`) and the student and
instructor releases (`release`). Nothing below imports it."""
