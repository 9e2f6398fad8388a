%{
/* placeholder grammar: being written */
%}
%define api.pure full
%token DUMMY
%%
start: DUMMY ;
%%
